#pragma once

// Shared by glibc_compat*.cc: the oldest symbol versions of the glibc calls
// they pin, per architecture (the first glibc of each: x86-64 2.2.5,
// aarch64 2.17), and the pin itself.

#if defined(__x86_64__)
#define GPUSLICE_GLIBC_BASE "GLIBC_2.2.5"
#define GPUSLICE_GLIBC_2_12 "GLIBC_2.12"  // pthread_setname_np, robust mutexes.
#define GPUSLICE_STAT_VERSION 1           // _STAT_VER_LINUX of __xstat & co.
#elif defined(__aarch64__)
#define GPUSLICE_GLIBC_BASE "GLIBC_2.17"
#define GPUSLICE_GLIBC_2_12 "GLIBC_2.17"
#define GPUSLICE_STAT_VERSION 0
#else
#error "glibc version pins exist for x86-64 and aarch64 only"
#endif

// `.symver local, name@VERSION` on an undefined symbol makes every reference
// to `local` one to name@VERSION.
#define GPUSLICE_OLD(local, name, version) __asm__(".symver " #local ", " #name "@" version)
