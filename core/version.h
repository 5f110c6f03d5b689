#pragma once
// The library's version: CMake's project(VERSION), written once there.
// CHANGELOG.md says what each version changed for users.

namespace lt {

// "MAJOR.MINOR.PATCH" of the library this program runs against (checkpoints record it).
const char* version();

}  // namespace lt
