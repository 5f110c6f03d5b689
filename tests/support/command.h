#pragma once
// Runs a shell command (a Python oracle, a reader) and returns its output's
// lines, stdout and stderr together, with its exit code.
#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace lt::testing {

inline std::vector<std::string> command_lines(const std::string& command, int& exit_code) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  for (size_t n; pipe != nullptr && (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) output.append(buf, n);
  const int status = pipe != nullptr ? ::pclose(pipe) : -1;
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace lt::testing
