#pragma once

// OPARA_API marks what libopara exports. The library is built with hidden visibility, so only
// names marked here are part of the ABI a downstream application links against.
#if defined(_WIN32)
#if defined(OPARA_BUILDING_LIBRARY)
#define OPARA_API __declspec(dllexport)
#else
#define OPARA_API __declspec(dllimport)
#endif
#else
#define OPARA_API __attribute__((visibility("default")))
#endif
