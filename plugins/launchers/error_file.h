#pragma once
// A worker's failure, told to its launcher once: torchelastic's error file.
// torchrun gives each worker a path in TORCHELASTIC_ERROR_FILE and prints the
// message it finds there in its failure summary; the local spawn sets the same
// variable, and also LT_LAUNCHER_PRINTS_ERRORS when the workers share its
// terminal: the workers then print nothing and the supervisor prints every
// rank's failure once, grouped by message, instead of N interleaved copies.

#include <map>
#include <optional>
#include <ostream>
#include <string>

namespace lt {

constexpr const char* kErrorFileVar = "TORCHELASTIC_ERROR_FILE";
constexpr const char* kLauncherPrintsErrorsVar = "LT_LAUNCHER_PRINTS_ERRORS";

// What a failing worker does with its error: records `message` in its error
// file (if its launcher gave it one) and writes "error: <printed>" to `err`
// (`printed` defaults to `message`) unless the launcher prints it.
void report_failure(std::ostream& err, const std::string& message, const std::optional<std::string>& printed = {});

// The torchelastic JSON record of `message`, and the message read back from
// such a file (nullopt: no file, or not a record of this form).
std::string error_file_record(const std::string& message);
std::optional<std::string> read_error_file(const std::string& path);

// The launcher's report of its workers' recorded failures (by rank): one
// "error: <message>" when every rank said the same, else one line per
// message naming its ranks ("error: ranks 0, 2: ...").
std::string group_failures(const std::map<size_t, std::string>& messages);

}  // namespace lt
