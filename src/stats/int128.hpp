// 128-bit unsigned integers for exact products and sums (GCC and Clang).
#pragma once

namespace stepscope {
inline namespace v1 {
namespace detail {

// __extension__ keeps -Wpedantic quiet about the non-standard type.
__extension__ typedef unsigned __int128 Uint128;

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
