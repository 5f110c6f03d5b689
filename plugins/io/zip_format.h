#pragma once
// The zip records' signatures, which the writer (zip_writer.h) and the
// checked reader (checked_reader.h) of torch.save's archive share.

#include <cstdint>

namespace lt::detail {

constexpr uint32_t kZipLocalHeader = 0x04034b50, kZipDataDescriptor = 0x08074b50, kZipDirectoryEntry = 0x02014b50,
                   kZipDirectoryEnd = 0x06054b50, kZip64End = 0x06064b50, kZip64Locator = 0x07064b50;

}  // namespace lt::detail
