// tests/device_fact_key.hpp — a report's device facts by their JSON key.
//
// Tests name facts as the report's readers do ("device_busy_fraction"); these
// helpers go through the one key list, for_each_device_fact(), so they cannot
// drift from the JSON. An unknown key throws: a misspelt fact fails the test
// instead of being silently absent.
#pragma once

#include <stepscope/report.hpp>

#include <map>
#include <optional>
#include <stdexcept>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace test {

inline bool is_device_fact_key(const std::string& key) {
  bool found = false;
  DeviceFactsSection probe;
  for_each_device_fact([&](const char* k, std::optional<double>&) { found = found || key == k; }, probe);
  return found;
}

// The fact `key` of `facts`, absent when the report does not hold it.
inline std::optional<double> device_fact(const DeviceFactsSection& facts, const std::string& key) {
  if (!is_device_fact_key(key)) throw std::invalid_argument("no device fact " + key);
  std::optional<double> out;
  for_each_device_fact(
      [&](const char* k, const std::optional<double>& value) {
        if (key == k) out = value;
      },
      facts);
  return out;
}

// Facts from key -> value pairs (a test table's row).
inline DeviceFactsSection device_facts_of(const std::map<std::string, double>& values) {
  DeviceFactsSection out;
  for (const auto& [key, value] : values) {
    if (!is_device_fact_key(key)) throw std::invalid_argument("no device fact " + key);
    for_each_device_fact(
        [&, v = value](const char* k, std::optional<double>& member) {
          if (key == k) member = v;
        },
        out);
  }
  return out;
}

}  // namespace test
}  // namespace v1
}  // namespace stepscope
