#include <lightning_cpp/plugins/distributed/rank_agreement.h>

#include <cstdint>
#include <map>
#include <sstream>

#include <torch/version.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/core/version.h>

namespace lt {

namespace {

// name \0 value \0 ..., in order.
std::string serialize(const OptionValues& values) {
  std::string out;
  for (const auto& [name, value] : values) {
    out += name;
    out += '\0';
    out += value;
    out += '\0';
  }
  return out;
}

OptionValues parse(const std::string& bytes) {
  OptionValues out;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t name_end = bytes.find('\0', at);
    const size_t value_end = name_end == std::string::npos ? std::string::npos : bytes.find('\0', name_end + 1);
    if (value_end == std::string::npos) break;
    out.emplace_back(bytes.substr(at, name_end - at), bytes.substr(name_end + 1, value_end - name_end - 1));
    at = value_end + 1;
  }
  return out;
}

// FNV-1a, 62 bits: the hash and its negation both fit an int64 (one MAX allreduce compares them).
int64_t hash62(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h >> 2);
}

// "rank 1", "ranks 0-2, 5".
std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    os << (i == 0 ? "" : ", ") << ranks[i];
    if (j > i) os << "-" << ranks[j];
    i = j + 1;
  }
  return os.str();
}

}  // namespace

OptionValues version_values() {
  return {{"lightning-cpp version", version()},
          {"LibTorch version", c10::str(TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH)}};
}

OptionValues module_values(const torch::nn::Module& module) {
  OptionValues out;
  for (const auto& p : module.named_parameters()) {
    out.emplace_back("model parameter " + p.key(), c10::str(p.value().sizes(), " ", p.value().scalar_type()));
  }
  for (const auto& b : module.named_buffers()) {
    out.emplace_back("model buffer " + b.key(), c10::str(b.value().sizes(), " ", b.value().scalar_type()));
  }
  return out;
}

std::string describe_disagreement(const std::vector<OptionValues>& per_rank) {
  constexpr size_t kShown = 8;
  // Each name's value by rank, names in first-seen order.
  std::vector<std::string> names;
  std::map<std::string, std::map<int64_t, std::string>> by_name;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (const auto& [name, value] : per_rank[r]) {
      if (by_name.count(name) == 0) names.push_back(name);
      by_name[name][static_cast<int64_t>(r)] = value;
    }
  }
  std::vector<std::string> lines;
  for (const std::string& name : names) {
    std::map<std::string, std::vector<int64_t>> ranks_by_value;  // "(none)": a rank without it
    for (size_t r = 0; r < per_rank.size(); ++r) {
      const auto& values = by_name[name];
      const auto it = values.find(static_cast<int64_t>(r));
      ranks_by_value[it == values.end() ? "(none)" : it->second].push_back(static_cast<int64_t>(r));
    }
    if (ranks_by_value.size() == 1) continue;
    std::string line = "  " + name + ":";
    bool first = true;
    for (const auto& [value, ranks] : ranks_by_value) {
      line += c10::str(first ? " " : "; ", value, " on ", ranks_text(ranks));
      first = false;
    }
    lines.push_back(line);
  }
  if (lines.empty()) {
    // The same values in another order (parameters registered in another order: other gradient buckets).
    for (size_t r = 1; r < per_rank.size(); ++r) {
      for (size_t i = 0; i < per_rank[r].size() && i < per_rank[0].size(); ++i) {
        if (per_rank[r][i].first == per_rank[0][i].first) continue;
        return c10::str("the ranks disagree before the first step (nothing has run): the same values in another ",
                        "order; number ", i, " is ", per_rank[0][i].first, " on rank 0, ", per_rank[r][i].first,
                        " on rank ", r, " (register the model's parameters in one order on every rank)");
      }
    }
    return {};
  }
  std::ostringstream os;
  os << "the ranks disagree before the first step (nothing has run): " << count_of(lines.size(), "value")
     << (lines.size() == 1 ? " differs" : " differ")
     << "; every rank must run with the same options, model and versions:";
  for (size_t i = 0; i < lines.size() && i < kShown; ++i) os << "\n" << lines[i];
  if (lines.size() > kShown) os << "\n  (and " << lines.size() - kShown << " more)";
  return os.str();
}

void check_ranks_agree(Strategy& strategy, const OptionValues& values) {
  const std::string bytes = serialize(values);
  const int64_t h = hash62(bytes);
  const torch::Tensor most = strategy.reduce(torch::tensor({h, -h}, torch::kLong), ReduceOp::kMax);
  if (most[0].item<int64_t>() == -most[1].item<int64_t>()) return;  // max == min: every rank's hash is one
  std::vector<OptionValues> per_rank;
  for (const std::string& rank_bytes : strategy.all_gather_bytes(bytes)) per_rank.push_back(parse(rank_bytes));
  const std::string why = describe_disagreement(per_rank);
  LT_CHECK_VALUE(why.empty(), why);
}

}  // namespace lt
