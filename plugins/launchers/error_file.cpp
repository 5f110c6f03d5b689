#include <lightning_cpp/plugins/launchers/error_file.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

namespace lt {

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// The JSON string starting at text[pos] (a '"'), decoded; nullopt if malformed.
// Non-ASCII \u escapes (which error_file_record never writes) are refused.
std::optional<std::string> parse_json_string(const std::string& text, size_t pos) {
  if (pos >= text.size() || text[pos] != '"') return std::nullopt;
  std::string out;
  for (size_t i = pos + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') return out;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i >= text.size()) return std::nullopt;
    switch (text[i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'u': {
        if (i + 4 >= text.size()) return std::nullopt;
        const unsigned long code = std::strtoul(text.substr(i + 1, 4).c_str(), nullptr, 16);
        if (code >= 0x80) return std::nullopt;
        out += static_cast<char>(code);
        i += 4;
        break;
      }
      default: out += text[i];  // \" \\ \/
    }
  }
  return std::nullopt;
}

}  // namespace

std::string error_file_record(const std::string& message) {
  return "{\"message\": {\"message\": " + json_string(message) + ", \"extraInfo\": {\"timestamp\": \"" +
         std::to_string(std::time(nullptr)) + "\"}}}";
}

std::optional<std::string> read_error_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // {"message": {"message": "<this>", ...}} as written above (and by Python's @record).
  const std::string key = "\"message\": ";
  const size_t outer = text.find(key);
  if (outer == std::string::npos) return std::nullopt;
  const size_t inner = text.find(key, outer + key.size());
  if (inner == std::string::npos) return std::nullopt;
  return parse_json_string(text, inner + key.size());
}

void report_failure(std::ostream& err, const std::string& message, const std::optional<std::string>& printed) {
  bool recorded = false;
  if (const char* path = std::getenv(kErrorFileVar); path != nullptr && *path != '\0') {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << error_file_record(message);
    out.close();
    recorded = static_cast<bool>(out);
  }
  const char* quiet = std::getenv(kLauncherPrintsErrorsVar);
  if (recorded && quiet != nullptr && std::string(quiet) == "1") return;
  err << "error: " << printed.value_or(message) << "\n";
  err.flush();
}

std::string group_failures(const std::map<size_t, std::string>& messages) {
  std::vector<std::pair<std::string, std::vector<size_t>>> groups;  // in order of the lowest rank
  for (const auto& [rank, message] : messages) {
    auto it = groups.begin();
    while (it != groups.end() && it->first != message) ++it;
    if (it == groups.end()) groups.push_back({message, {rank}});
    else it->second.push_back(rank);
  }
  std::ostringstream os;
  for (const auto& [message, ranks] : groups) {
    os << "error: ";
    if (groups.size() > 1) {
      os << (ranks.size() == 1 ? "rank " : "ranks ");
      for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
      os << ": ";
    }
    os << message << "\n";
  }
  return os.str();
}

}  // namespace lt
