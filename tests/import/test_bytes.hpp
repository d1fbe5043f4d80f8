// Helpers shared by the import tests: raw file bytes and in-memory gzip.
#pragma once

#include <zlib.h>
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace test {

// The file's bytes as they are on disk (a .gz stays compressed).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A gzip member of `plain` (what the profiler writes for .json.gz).
inline std::string gzip(const std::string& plain, int level = Z_DEFAULT_COMPRESSION) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, static_cast<uLong>(plain.size())) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  zs.avail_in = static_cast<uInt>(plain.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// The plain bytes of a gzip stream (one member).
inline std::string gunzip(const std::string& compressed) {
  z_stream zs{};
  REQUIRE(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK);
  std::string out;
  char buffer[1 << 16];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  zs.avail_in = static_cast<uInt>(compressed.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buffer);
    zs.avail_out = sizeof buffer;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buffer, sizeof buffer - zs.avail_out);
  }
  inflateEnd(&zs);
  REQUIRE(rc == Z_STREAM_END);
  return out;
}

}  // namespace test
}  // namespace v1
}  // namespace stepscope
