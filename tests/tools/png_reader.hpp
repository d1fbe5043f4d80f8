// A tiny PNG reader for the HTML screenshot test: 8-bit RGB/RGBA,
// non-interlaced (what Chromium writes). Enough to tell a rendered page from
// a blank one; zlib does the inflating.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace stepscope_test {

struct Image {
  std::uint32_t width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // width * height * 3
  std::string error;
};

inline std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

inline Image decode_png(const std::string& file) {
  Image img;
  const auto* data = reinterpret_cast<const unsigned char*>(file.data());
  static const unsigned char kMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (file.size() < 8 || std::string(file, 0, 8) != std::string(reinterpret_cast<const char*>(kMagic), 8)) {
    img.error = "not a PNG";
    return img;
  }
  int bit_depth = 0, color_type = 0, interlace = 0;
  std::string idat;
  for (std::size_t at = 8; at + 12 <= file.size();) {
    const std::uint32_t length = be32(data + at);
    const std::string type(file, at + 4, 4);
    if (at + 12 + length > file.size()) break;
    const unsigned char* body = data + at + 8;
    if (type == "IHDR") {
      img.width = be32(body);
      img.height = be32(body + 4);
      bit_depth = body[8];
      color_type = body[9];
      interlace = body[12];
    } else if (type == "IDAT") {
      idat.append(reinterpret_cast<const char*>(body), length);
    } else if (type == "IEND") {
      break;
    }
    at += 12 + length;
  }
  const int channels = color_type == 2 ? 3 : color_type == 6 ? 4 : 0;
  if (bit_depth != 8 || channels == 0 || interlace != 0 || img.width == 0 || img.height == 0 || img.width > 20000 ||
      img.height > 50000) {
    img.error = "unsupported PNG layout";
    return img;
  }
  const std::size_t stride = static_cast<std::size_t>(img.width) * channels;
  std::vector<std::uint8_t> raw((stride + 1) * img.height);
  uLongf raw_size = static_cast<uLongf>(raw.size());
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), static_cast<uLong>(idat.size())) !=
          Z_OK ||
      raw_size != raw.size()) {
    img.error = "cannot inflate the image data";
    return img;
  }
  // Undo the per-row filters (PNG spec, section 9).
  std::vector<std::uint8_t> pixels(stride * img.height);
  for (std::uint32_t y = 0; y < img.height; ++y) {
    const std::uint8_t filter = raw[y * (stride + 1)];
    const std::uint8_t* in = &raw[y * (stride + 1) + 1];
    std::uint8_t* row = &pixels[y * stride];
    const std::uint8_t* up = y > 0 ? &pixels[(y - 1) * stride] : nullptr;
    for (std::size_t x = 0; x < stride; ++x) {
      const int a = x >= static_cast<std::size_t>(channels) ? row[x - channels] : 0;
      const int b = up ? up[x] : 0;
      const int c = up && x >= static_cast<std::size_t>(channels) ? up[x - channels] : 0;
      int predictor = 0;
      switch (filter) {
        case 0:
          predictor = 0;
          break;
        case 1:
          predictor = a;
          break;
        case 2:
          predictor = b;
          break;
        case 3:
          predictor = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          img.error = "bad filter type";
          return img;
      }
      row[x] = static_cast<std::uint8_t>(in[x] + predictor);
    }
  }
  img.rgb.resize(static_cast<std::size_t>(img.width) * img.height * 3);
  for (std::size_t i = 0, n = static_cast<std::size_t>(img.width) * img.height; i < n; ++i)
    for (int k = 0; k < 3; ++k) img.rgb[i * 3 + k] = pixels[i * channels + k];
  return img;
}

}  // namespace stepscope_test
