#include <lightning_cpp/loggers/tensorboard.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/files.h>
#include <lightning_cpp/loggers/utilities.h>

namespace lt {

namespace fs = std::filesystem;

namespace {

// -- TFRecord framing -----------------------------------------------------------

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses it.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

constexpr uint32_t crc32c(std::string_view data) {
  uint32_t c = ~0u;
  for (char ch : data) c = kCrc32cTable[(c ^ static_cast<uint8_t>(ch)) & 0xffu] ^ (c >> 8);
  return ~c;
}
static_assert(crc32c("123456789") == 0xE3069283u, "CRC32C check value (RFC 3720 B.4)");

// TFRecord stores CRCs masked: a CRC of data that holds CRCs is weak.
constexpr uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void put_little_endian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xffu);
}

// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
std::string tfrecord(const std::string& data) {
  std::string out;
  put_little_endian(out, data.size(), 8);
  put_little_endian(out, masked_crc32c(out), 4);
  out += data;
  put_little_endian(out, masked_crc32c(data), 4);
  return out;
}

// -- protobuf wire format -------------------------------------------------------

class ProtoWriter {
 public:
  ProtoWriter& varint_field(int field, uint64_t v) {
    key(field, kVarint);
    varint(v);
    return *this;
  }
  ProtoWriter& int64_field(int field, int64_t v) { return varint_field(field, static_cast<uint64_t>(v)); }
  ProtoWriter& double_field(int field, double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    key(field, kFixed64);
    put_little_endian(out_, bits, 8);
    return *this;
  }
  ProtoWriter& float_field(int field, float v) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    key(field, kFixed32);
    put_little_endian(out_, bits, 4);
    return *this;
  }
  ProtoWriter& bytes_field(int field, const std::string& v) {
    key(field, kLengthDelimited);
    varint(v.size());
    out_ += v;
    return *this;
  }
  ProtoWriter& message_field(int field, const ProtoWriter& m) { return bytes_field(field, m.str()); }
  // A repeated double, packed (proto3's encoding).
  ProtoWriter& packed_doubles_field(int field, const std::vector<double>& values) {
    std::string packed;
    for (const double v : values) {
      uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof(bits));
      put_little_endian(packed, bits, 8);
    }
    return bytes_field(field, packed);
  }
  const std::string& str() const { return out_; }

 private:
  static constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;
  void key(int field, int wire_type) { varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type)); }
  void varint(uint64_t v) {
    for (; v >= 0x80; v >>= 7) out_ += static_cast<char>((v & 0x7f) | 0x80);
    out_ += static_cast<char>(v);
  }
  std::string out_;
};

// Field numbers and enum values, from tensorboard/compat/proto/event.proto and
// summary.proto, tensorboard/plugins/hparams/plugin_data.proto and api.proto,
// and google/protobuf/struct.proto. A proto3 reader takes a field at its zero
// value written or left out; a oneof member must be written to be set.
namespace event {
constexpr int kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;
}
namespace session_log {
constexpr int kStatus = 1;
constexpr uint64_t kStart = 1;
}  // namespace session_log
namespace summary {
constexpr int kValue = 1;
}
namespace summary_value {
constexpr int kTag = 1, kSimpleValue = 2, kHisto = 5, kTensor = 8, kMetadata = 9;
}
namespace histogram {  // HistogramProto
constexpr int kMin = 1, kMax = 2, kNum = 3, kSum = 4, kSumSquares = 5, kBucketLimit = 6, kBucket = 7;
}
namespace tensor {  // TensorProto (tensor.proto), TensorShapeProto (tensor_shape.proto)
constexpr int kDtype = 1, kShape = 2, kStringVal = 8;
constexpr uint64_t kDtString = 7;  // types.proto's DT_STRING
constexpr int kShapeDim = 2, kDimSize = 1;
}  // namespace tensor
namespace summary_metadata {
constexpr int kPluginData = 1;
}
namespace plugin_data {
constexpr int kPluginName = 1, kContent = 2;
}
namespace hparams_plugin_data {
constexpr int kExperiment = 2, kSessionStartInfo = 3, kSessionEndInfo = 4;  // version (1) stays 0
}
namespace experiment {
constexpr int kHparamInfos = 4, kMetricInfos = 5;
}
namespace hparam_info {
constexpr int kName = 1, kType = 4;
constexpr uint64_t kString = 1, kBool = 2, kFloat64 = 3;  // DataType
}  // namespace hparam_info
namespace metric_info {
constexpr int kName = 1;
}
namespace metric_name {
constexpr int kTag = 2;
}
namespace session_start_info {
constexpr int kHparams = 1;       // map<string, google.protobuf.Value>
constexpr int kKey = 1, kValue = 2;  // a map entry
}  // namespace session_start_info
namespace value {
constexpr int kNumberValue = 2, kStringValue = 3, kBoolValue = 4;
}
namespace session_end_info {
constexpr int kStatus = 1;
constexpr uint64_t kSuccess = 1;
}  // namespace session_end_info

// The tags and plugin name TensorBoard's HParams plugin looks for.
constexpr const char* kExperimentTag = "_hparams_/experiment";
constexpr const char* kSessionStartInfoTag = "_hparams_/session_start_info";
constexpr const char* kSessionEndInfoTag = "_hparams_/session_end_info";
constexpr const char* kHparamsPluginName = "hparams";
constexpr const char* kHpMetric = "hp_metric";
// The text plugin's name, and the suffix SummaryWriter.add_text gives a text's tag.
constexpr const char* kTextPluginName = "text";
constexpr const char* kTextTagSuffix = "/text_summary";

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ProtoWriter new_event() { return std::move(ProtoWriter().double_field(event::kWallTime, unix_seconds())); }

// An Event holding one hparams plugin summary.
std::string hparams_event(const char* tag, int data_field, const ProtoWriter& data) {
  // The plugin's content is a serialized HParamsPluginData (version 0).
  const ProtoWriter content = ProtoWriter().message_field(data_field, data);
  const ProtoWriter plugin = ProtoWriter()
                                 .bytes_field(plugin_data::kPluginName, kHparamsPluginName)
                                 .bytes_field(plugin_data::kContent, content.str());
  const ProtoWriter value = ProtoWriter()
                                .bytes_field(summary_value::kTag, tag)
                                .message_field(summary_value::kMetadata,
                                               ProtoWriter().message_field(summary_metadata::kPluginData, plugin));
  return new_event().message_field(event::kSummary, ProtoWriter().message_field(summary::kValue, value)).str();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

// Tells apart the events files one process opens in the same second.
int64_t next_file_counter() {
  static std::atomic<int64_t> counter{0};
  return counter++;
}

}  // namespace

TensorBoardLogger::TensorBoardLogger(TensorBoardLoggerOptions options)
    : options_(std::move(options)),
      folder_("TensorBoardLogger", options_.save_dir(), options_.name(), options_.version()) {
  {
    const TensorBoardLoggerOptions& options = options_;
    const char* owner = "TensorBoardLogger: ";
#define LT_OPTION LT_OPTION_CHECK
#define LT_OPTION_WITH LT_OPTION_WITH_CHECK
#include <lightning_cpp/loggers/tensorboard_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
  }
}

TensorBoardLogger::~TensorBoardLogger() {
  try {
    save();
  } catch (...) {
  }
}

int64_t TensorBoardLogger::version() const { return folder_.version(); }

std::string TensorBoardLogger::log_dir() const { return folder_.path(); }

void TensorBoardLogger::continue_previous() { folder_.continue_previous(); }

void TensorBoardLogger::continue_version_of(const std::string& checkpoint) { folder_.continue_version_of(checkpoint); }

StateDict TensorBoardLogger::state_dict() const {
  StateDict s = new_state_dict();
  s.insert("version", version());
  s.insert("step", last_step_);
  return s;
}

void TensorBoardLogger::load_state_dict(const StateDict& state) {
  // A checkpoint of another version: this run's folder is a new log.
  if (!state.contains("version") || state.at("version").toInt() != version() || !state.contains("step")) return;
  last_step_ = state.at("step").toInt();
  // TensorBoard hides the events at this step and after from earlier files.
  const ProtoWriter start = ProtoWriter().varint_field(session_log::kStatus, session_log::kStart);
  add_record(new_event().int64_field(event::kStep, last_step_ + 1).message_field(event::kSessionLog, start).str());
}

void TensorBoardLogger::add_record(const std::string& event) {
  if (events_file_.empty()) {
    const double now = unix_seconds();
    char name[512];
    std::snprintf(name, sizeof(name), "events.out.tfevents.%010" PRId64 ".%s.%d.%" PRId64,
                  static_cast<int64_t>(now), host_name().c_str(), static_cast<int>(::getpid()), next_file_counter());
    events_file_ = (fs::path(log_dir()) / name).string();
    pending_ += tfrecord(
        ProtoWriter().double_field(event::kWallTime, now).bytes_field(event::kFileVersion, kFileVersion).str());
    last_flush_time_ = now;
  }
  pending_ += tfrecord(event);
}

void TensorBoardLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  for (const auto& [tag, v] : metrics) {
    const ProtoWriter value = ProtoWriter()
                                  .bytes_field(summary_value::kTag, tag)
                                  .float_field(summary_value::kSimpleValue, static_cast<float>(v));
    add_record(new_event()
                   .int64_field(event::kStep, step)
                   .message_field(event::kSummary, ProtoWriter().message_field(summary::kValue, value))
                   .str());
  }
  last_step_ = std::max(last_step_, step);
  if (++log_calls_since_flush_ >= options_.flush_logs_every_n_steps() ||
      unix_seconds() - last_flush_time_ >= options_.flush_secs()) {
    flush();
  }
}

void TensorBoardLogger::add_summary(const std::string& value, int64_t step) {
  add_record(new_event()
                 .int64_field(event::kStep, step)
                 .message_field(event::kSummary, ProtoWriter().bytes_field(summary::kValue, value))
                 .str());
  last_step_ = std::max(last_step_, step);
  flush();
}

void TensorBoardLogger::add_text(const std::string& tag, const std::string& text, int64_t step) {
  // What torch.utils.tensorboard.summary.text writes: a string tensor of one
  // element, for the text plugin (its content: TextPluginData, version 0).
  const ProtoWriter plugin = ProtoWriter().bytes_field(plugin_data::kPluginName, kTextPluginName);
  const ProtoWriter shape =
      ProtoWriter().message_field(tensor::kShapeDim, ProtoWriter().int64_field(tensor::kDimSize, 1));
  const ProtoWriter value =
      ProtoWriter()
          .bytes_field(summary_value::kTag, tag + kTextTagSuffix)
          .message_field(summary_value::kMetadata, ProtoWriter().message_field(summary_metadata::kPluginData, plugin))
          .message_field(summary_value::kTensor, ProtoWriter()
                                                     .varint_field(tensor::kDtype, tensor::kDtString)
                                                     .message_field(tensor::kShape, shape)
                                                     .bytes_field(tensor::kStringVal, text));
  add_summary(value.str(), step);
}

void TensorBoardLogger::add_histogram(const std::string& tag, const torch::Tensor& values, int64_t step,
                                      int64_t bins) {
  LT_CHECK_VALUE(bins >= 1, "TensorBoardLogger::add_histogram: '", tag, "': bins must be >= 1, got ", bins);
  const torch::Tensor v = values.detach().to(torch::kCPU, torch::kDouble).reshape(-1);
  LT_CHECK_VALUE(v.numel() > 0, "TensorBoardLogger::add_histogram: '", tag, "': no values");
  LT_CHECK_VALUE(torch::isfinite(v).all().item<bool>(), "TensorBoardLogger::add_histogram: '", tag,
                 "': the values hold an infinity or a NaN");
  const double lo = v.min().item<double>(), hi = v.max().item<double>();
  // Equal-width buckets over [min, max]; each bucket's limit is its right edge.
  const double width = hi > lo ? (hi - lo) / static_cast<double>(bins) : 1.0;
  const torch::Tensor counts = torch::histc(v, bins, lo, hi > lo ? hi : lo + width * static_cast<double>(bins));
  std::vector<double> limits(static_cast<size_t>(bins)), buckets(static_cast<size_t>(bins));
  for (int64_t i = 0; i < bins; ++i) {
    limits[i] = i + 1 == bins && hi > lo ? hi : lo + width * static_cast<double>(i + 1);
    buckets[i] = counts[i].item<double>();
  }
  const ProtoWriter histo = ProtoWriter()
                                .double_field(histogram::kMin, lo)
                                .double_field(histogram::kMax, hi)
                                .double_field(histogram::kNum, static_cast<double>(v.numel()))
                                .double_field(histogram::kSum, v.sum().item<double>())
                                .double_field(histogram::kSumSquares, v.dot(v).item<double>())
                                .packed_doubles_field(histogram::kBucketLimit, limits)
                                .packed_doubles_field(histogram::kBucket, buckets);
  add_summary(ProtoWriter().bytes_field(summary_value::kTag, tag).message_field(summary_value::kHisto, histo).str(),
              step);
}

void TensorBoardLogger::log_hyperparams(const HParams& params) {
  for (const auto& [k, v] : params) hparams_[k] = v;
  fs::create_directories(log_dir());
  save_hparams_to_yaml((fs::path(log_dir()) / kHparamsFile).string(), hparams_);

  if (options_.default_hp_metric()) log_metrics({{kHpMetric, -1.0}}, 0);
  // What torch.utils.tensorboard.summary.hparams writes: the experiment (the
  // hparams' names and types, the metrics' tags), this session's values, and
  // its end (as PyTorch: success, written at once).
  ProtoWriter exp;
  ProtoWriter start;
  for (const auto& [k, v] : hparams_) {
    // As summary.hparams types Python's values: numbers (int or float) as float64.
    ProtoWriter typed;
    uint64_t type = hparam_info::kString;
    if (const auto* b = std::get_if<bool>(&v.value())) {
      typed.varint_field(value::kBoolValue, *b ? 1 : 0);
      type = hparam_info::kBool;
    } else if (const auto* i = std::get_if<int64_t>(&v.value())) {
      typed.double_field(value::kNumberValue, static_cast<double>(*i));
      type = hparam_info::kFloat64;
    } else if (const auto* d = std::get_if<double>(&v.value())) {
      typed.double_field(value::kNumberValue, *d);
      type = hparam_info::kFloat64;
    } else {
      typed.bytes_field(value::kStringValue, v.str());
    }
    exp.message_field(experiment::kHparamInfos,
                      ProtoWriter().bytes_field(hparam_info::kName, k).varint_field(hparam_info::kType, type));
    start.message_field(session_start_info::kHparams, ProtoWriter()
                                                          .bytes_field(session_start_info::kKey, k)
                                                          .message_field(session_start_info::kValue, typed));
  }
  if (options_.default_hp_metric()) {
    exp.message_field(experiment::kMetricInfos,
                      ProtoWriter().message_field(metric_info::kName,
                                                  ProtoWriter().bytes_field(metric_name::kTag, kHpMetric)));
  }
  add_record(hparams_event(kExperimentTag, hparams_plugin_data::kExperiment, exp));
  add_record(hparams_event(kSessionStartInfoTag, hparams_plugin_data::kSessionStartInfo, start));
  add_record(hparams_event(kSessionEndInfoTag, hparams_plugin_data::kSessionEndInfo,
                           ProtoWriter().varint_field(session_end_info::kStatus, session_end_info::kSuccess)));
  flush();
}

void TensorBoardLogger::flush() {
  if (pending_.empty()) return;
  fs::create_directories(log_dir());
  // A failure (a full disk) stops the run naming the file; the records stay
  // buffered, and the file is as it was (append_file cuts it back).
  append_file(events_file_, pending_);
  pending_.clear();
  log_calls_since_flush_ = 0;
  last_flush_time_ = unix_seconds();
}

void TensorBoardLogger::save() { flush(); }

void TensorBoardLogger::finalize(const std::string& /*status*/) { save(); }

}  // namespace lt
