// The shim loads into the CUDA processes of any image people run: Ubuntu
// 20.04/22.04 PyTorch images, RHEL 8/9, Debian 11, manylinux2014 wheels
// (glibc 2.17). Built on Debian 12 (glibc 2.36), a plain link binds every
// glibc call to its newest version (dlopen@GLIBC_2.34, stat@GLIBC_2.33...),
// and the dynamic linker of an older glibc refuses to load the library.
//
// The link therefore redirects (-Wl,--wrap, list in CMakeLists.txt) the
// calls whose default version is newer than GLIBC_2.17 to the wrappers
// below, in our code and in the libstdc++/libgcc archives linked in alike:
//   - calls that exist in old glibc bind to their old version (.symver);
//     those lived in libdl.so.2 / libpthread.so.0 then, which the shim names
//     as NEEDED (stubs on glibc >= 2.34);
//   - stat/fstat/lstat were inline calls of __xstat & co. before 2.33, which
//     every glibc still exports;
//   - what old glibc lacks is done here: _dl_find_object (libgcc's unwinder,
//     2.35) by dl_iterate_phdr, pthread_cond_clockwait (libstdc++'s timed
//     waits, 2.34) by pthread_cond_timedwait, arc4random/getentropy (libstdc++'s
//     random_device, 2.36/2.25) and memfd_create (2.27) by their system
//     calls, and
//     __libc_single_threaded (libstdc++, 2.32) as "not single-threaded",
//     which is always safe.
// Linked into the shim, the simulated libcuda/libnvidia-ml and the demo
// worker (gpuslice_old_glibc in CMakeLists.txt); executables add
// glibc_compat_exe.cc. shim_glibc_test reads their version needs and fails
// above 2.17.

#include "shim/glibc/glibc_compat.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

constexpr int kStatVersion = GPUSLICE_STAT_VERSION;

extern "C" {

void* gpuslice_old_dlopen(const char* file, int mode);
char* gpuslice_old_dlerror();
int gpuslice_old_pthread_create(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
int gpuslice_old_pthread_setname_np(pthread_t, const char*);
int gpuslice_old_pthread_once(pthread_once_t*, void (*)());
int gpuslice_old_pthread_key_create(pthread_key_t*, void (*)(void*));
int gpuslice_old_fxstat(int, int, struct stat*);
int gpuslice_old_xstat(int, const char*, struct stat*);
int gpuslice_old_lxstat(int, const char*, struct stat*);
GPUSLICE_OLD(gpuslice_old_dlopen, dlopen, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_dlerror, dlerror, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_pthread_create, pthread_create, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_pthread_setname_np, pthread_setname_np, GPUSLICE_GLIBC_2_12);
GPUSLICE_OLD(gpuslice_old_pthread_once, pthread_once, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_pthread_key_create, __pthread_key_create, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_fxstat, __fxstat, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_xstat, __xstat, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_lxstat, __lxstat, GPUSLICE_GLIBC_BASE);
int gpuslice_old_mutex_consistent(pthread_mutex_t*);
int gpuslice_old_mutexattr_init(pthread_mutexattr_t*);
int gpuslice_old_mutexattr_destroy(pthread_mutexattr_t*);
int gpuslice_old_mutexattr_setpshared(pthread_mutexattr_t*, int);
int gpuslice_old_mutexattr_setrobust(pthread_mutexattr_t*, int);
int gpuslice_old_rwlock_rdlock(pthread_rwlock_t*);
int gpuslice_old_rwlock_wrlock(pthread_rwlock_t*);
int gpuslice_old_rwlock_unlock(pthread_rwlock_t*);
int gpuslice_old_join(pthread_t, void**);
int gpuslice_old_detach(pthread_t);
int gpuslice_old_key_create(pthread_key_t*, void (*)(void*));
int gpuslice_old_key_delete(pthread_key_t);
void* gpuslice_old_getspecific(pthread_key_t);
int gpuslice_old_setspecific(pthread_key_t, const void*);
int gpuslice_old_fxstat64(int, int, struct stat64*);
GPUSLICE_OLD(gpuslice_old_join, pthread_join, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_detach, pthread_detach, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_key_create, pthread_key_create, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_key_delete, pthread_key_delete, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_getspecific, pthread_getspecific, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_setspecific, pthread_setspecific, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_fxstat64, __fxstat64, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_mutex_consistent, pthread_mutex_consistent, GPUSLICE_GLIBC_2_12);
GPUSLICE_OLD(gpuslice_old_mutexattr_init, pthread_mutexattr_init, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_mutexattr_destroy, pthread_mutexattr_destroy, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_mutexattr_setpshared, pthread_mutexattr_setpshared, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_mutexattr_setrobust, pthread_mutexattr_setrobust, GPUSLICE_GLIBC_2_12);
GPUSLICE_OLD(gpuslice_old_rwlock_rdlock, pthread_rwlock_rdlock, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_rwlock_wrlock, pthread_rwlock_wrlock, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_rwlock_unlock, pthread_rwlock_unlock, GPUSLICE_GLIBC_BASE);

#define GPUSLICE_HIDDEN __attribute__((visibility("hidden")))

GPUSLICE_HIDDEN void* __wrap_dlopen(const char* file, int mode) {
  return gpuslice_old_dlopen(file, mode);
}
GPUSLICE_HIDDEN char* __wrap_dlerror() { return gpuslice_old_dlerror(); }
GPUSLICE_HIDDEN int __wrap_pthread_create(pthread_t* t, const pthread_attr_t* a,
                                          void* (*start)(void*), void* arg) {
  return gpuslice_old_pthread_create(t, a, start, arg);
}
GPUSLICE_HIDDEN int __wrap_pthread_setname_np(pthread_t t, const char* name) {
  return gpuslice_old_pthread_setname_np(t, name);
}
GPUSLICE_HIDDEN int __wrap_pthread_once(pthread_once_t* once, void (*init)()) {
  return gpuslice_old_pthread_once(once, init);
}
GPUSLICE_HIDDEN int __wrap___pthread_key_create(pthread_key_t* key, void (*destroy)(void*)) {
  return gpuslice_old_pthread_key_create(key, destroy);
}
GPUSLICE_HIDDEN int __wrap_fstat(int fd, struct stat* st) {
  return gpuslice_old_fxstat(kStatVersion, fd, st);
}
GPUSLICE_HIDDEN int __wrap_stat(const char* path, struct stat* st) {
  return gpuslice_old_xstat(kStatVersion, path, st);
}
GPUSLICE_HIDDEN int __wrap_lstat(const char* path, struct stat* st) {
  return gpuslice_old_lxstat(kStatVersion, path, st);
}

GPUSLICE_HIDDEN int __wrap_pthread_mutex_consistent(pthread_mutex_t* m) {
  return gpuslice_old_mutex_consistent(m);
}
GPUSLICE_HIDDEN int __wrap_pthread_mutexattr_init(pthread_mutexattr_t* a) {
  return gpuslice_old_mutexattr_init(a);
}
GPUSLICE_HIDDEN int __wrap_pthread_mutexattr_destroy(pthread_mutexattr_t* a) {
  return gpuslice_old_mutexattr_destroy(a);
}
GPUSLICE_HIDDEN int __wrap_pthread_mutexattr_setpshared(pthread_mutexattr_t* a, int shared) {
  return gpuslice_old_mutexattr_setpshared(a, shared);
}
GPUSLICE_HIDDEN int __wrap_pthread_mutexattr_setrobust(pthread_mutexattr_t* a, int robust) {
  return gpuslice_old_mutexattr_setrobust(a, robust);
}
GPUSLICE_HIDDEN int __wrap_pthread_rwlock_rdlock(pthread_rwlock_t* l) {
  return gpuslice_old_rwlock_rdlock(l);
}
GPUSLICE_HIDDEN int __wrap_pthread_rwlock_wrlock(pthread_rwlock_t* l) {
  return gpuslice_old_rwlock_wrlock(l);
}
GPUSLICE_HIDDEN int __wrap_pthread_rwlock_unlock(pthread_rwlock_t* l) {
  return gpuslice_old_rwlock_unlock(l);
}
GPUSLICE_HIDDEN int __wrap_pthread_join(pthread_t t, void** ret) {
  return gpuslice_old_join(t, ret);
}
GPUSLICE_HIDDEN int __wrap_pthread_detach(pthread_t t) { return gpuslice_old_detach(t); }
GPUSLICE_HIDDEN int __wrap_pthread_key_create(pthread_key_t* k, void (*destroy)(void*)) {
  return gpuslice_old_key_create(k, destroy);
}
GPUSLICE_HIDDEN int __wrap_pthread_key_delete(pthread_key_t k) {
  return gpuslice_old_key_delete(k);
}
GPUSLICE_HIDDEN void* __wrap_pthread_getspecific(pthread_key_t k) {
  return gpuslice_old_getspecific(k);
}
GPUSLICE_HIDDEN int __wrap_pthread_setspecific(pthread_key_t k, const void* v) {
  return gpuslice_old_setspecific(k, v);
}
GPUSLICE_HIDDEN int __wrap_fstat64(int fd, struct stat64* st) {
  return gpuslice_old_fxstat64(kStatVersion, fd, st);
}
GPUSLICE_HIDDEN int __wrap_memfd_create(const char* name, unsigned int flags) {
  return static_cast<int>(syscall(SYS_memfd_create, name, flags));
}

// libstdc++'s condition_variable::wait_for/wait_until on the steady clock
// (2.34). Old glibc has only pthread_cond_timedwait, on the condition's own
// clock (CLOCK_REALTIME for a default one, as std::condition_variable's):
// the deadline becomes "now on that clock + what is left on `clock`". A
// wall-clock step during the wait moves its end: a wait that may end early
// or late, which every caller of a timed wait already handles.
GPUSLICE_HIDDEN int __wrap_pthread_cond_clockwait(pthread_cond_t* cond, pthread_mutex_t* mutex,
                                                  clockid_t clock, const struct timespec* abstime) {
  if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cond, mutex, abstime);
  struct timespec now, real;
  clock_gettime(clock, &now);
  clock_gettime(CLOCK_REALTIME, &real);
  int64_t left_ns =
      (abstime->tv_sec - now.tv_sec) * 1000000000LL + (abstime->tv_nsec - now.tv_nsec);
  if (left_ns < 0) left_ns = 0;
  int64_t end_ns = real.tv_nsec + left_ns;
  struct timespec deadline;
  deadline.tv_sec = real.tv_sec + static_cast<time_t>(end_ns / 1000000000LL);
  deadline.tv_nsec = static_cast<long>(end_ns % 1000000000LL);
  return pthread_cond_timedwait(cond, mutex, &deadline);
}

// libstdc++ skips atomics when this is non-zero; 0 is always correct.
GPUSLICE_HIDDEN char __wrap___libc_single_threaded = 0;

namespace {

long GetRandom(void* buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    long n = syscall(SYS_getrandom, static_cast<char*>(buf) + done, len - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    done += static_cast<size_t>(n);
  }
  return 0;
}

struct FindObject {
  uintptr_t pc;
  dl_find_object* out;
  bool found;
};

int FindObjectIn(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<FindObject*>(data);
  uintptr_t start = UINTPTR_MAX, end = 0;
  bool holds = false;
  const void* eh_frame = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    const uintptr_t at = info->dlpi_addr + p.p_vaddr;
    if (p.p_type == PT_LOAD) {
      if (at < start) start = at;
      if (at + p.p_memsz > end) end = at + p.p_memsz;
      holds = holds || (f->pc >= at && f->pc < at + p.p_memsz);
    } else if (p.p_type == PT_GNU_EH_FRAME) {
      eh_frame = reinterpret_cast<const void*>(at);
    }
  }
  if (!holds) return 0;
  f->out->dlfo_flags = 0;
  f->out->dlfo_map_start = reinterpret_cast<void*>(start);
  f->out->dlfo_map_end = reinterpret_cast<void*>(end);
  f->out->dlfo_link_map = nullptr;  // libgcc does not read it.
  f->out->dlfo_eh_frame = const_cast<void*>(eh_frame);
  f->found = true;
  return 1;
}

}  // namespace

GPUSLICE_HIDDEN uint32_t __wrap_arc4random() {
  uint32_t v = 0;
  GetRandom(&v, sizeof v);
  return v;
}

GPUSLICE_HIDDEN int __wrap_getentropy(void* buf, size_t len) {
  if (len > 256) {
    errno = EIO;
    return -1;
  }
  return GetRandom(buf, len) == 0 ? 0 : -1;
}

// What libgcc's unwinder asks of glibc >= 2.35: the object holding `pc`
// and its PT_GNU_EH_FRAME. -1 when no loaded object holds it.
GPUSLICE_HIDDEN int __wrap__dl_find_object(void* pc, dl_find_object* result) {
  FindObject f{reinterpret_cast<uintptr_t>(pc), result, false};
  dl_iterate_phdr(FindObjectIn, &f);
  return f.found ? 0 : -1;
}

}  // extern "C"
