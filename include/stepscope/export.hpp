// stepscope/export.hpp — symbol visibility for the stepscope library.
//
// The library is built with hidden visibility; everything users call is marked
// STEPSCOPE_API. A static build (the default) defines STEPSCOPE_STATIC_DEFINE
// through the CMake target, which makes the macro empty.
#pragma once

#if defined(STEPSCOPE_STATIC_DEFINE)
#define STEPSCOPE_API
#elif defined(_WIN32)
#if defined(STEPSCOPE_BUILDING_LIBRARY)
#define STEPSCOPE_API __declspec(dllexport)
#else
#define STEPSCOPE_API __declspec(dllimport)
#endif
#else
#define STEPSCOPE_API __attribute__((visibility("default")))
#endif

#if defined(__GNUC__) || defined(__clang__)
#define STEPSCOPE_DETAIL_LIKELY(x) __builtin_expect(!!(x), 1)
#define STEPSCOPE_DETAIL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define STEPSCOPE_DETAIL_NOINLINE __attribute__((noinline))
#define STEPSCOPE_DETAIL_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define STEPSCOPE_DETAIL_LIKELY(x) (x)
#define STEPSCOPE_DETAIL_UNLIKELY(x) (x)
#define STEPSCOPE_DETAIL_NOINLINE
#define STEPSCOPE_DETAIL_ALWAYS_INLINE inline
#endif
