// CRC-32 (IEEE 802.3), the checksum of checkpoint and shard files.
#pragma once

#include <cstddef>
#include <cstdint>

namespace yard::actors {

// Continues `crc` (0 to start) over n bytes.
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);

}  // namespace yard::actors
