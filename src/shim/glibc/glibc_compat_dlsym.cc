// glibc_compat.cc's dlsym and dlvsym (moved into libc.so.6 at 2.34) and
// __cxa_thread_atexit_impl (2.18, libstdc++'s thread_local destructors).
// Apart because the shim defines its own dlsym and wraps neither.

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "shim/glibc/glibc_compat.h"

extern "C" {

void* gpuslice_old_dlsym(void*, const char*);
void* gpuslice_old_dlvsym(void*, const char*, const char*);
GPUSLICE_OLD(gpuslice_old_dlsym, dlsym, GPUSLICE_GLIBC_BASE);
GPUSLICE_OLD(gpuslice_old_dlvsym, dlvsym, GPUSLICE_GLIBC_BASE);

__attribute__((visibility("hidden"))) void* __wrap_dlsym(void* handle, const char* name) {
  return gpuslice_old_dlsym(handle, name);
}
__attribute__((visibility("hidden"))) void* __wrap_dlvsym(void* handle, const char* name,
                                                          const char* version) {
  return gpuslice_old_dlvsym(handle, name, version);
}

namespace {

using Dtor = void (*)(void*);
using AtExitImpl = int (*)(Dtor, void*, void*);

// Without glibc's (before 2.18): each thread's destructors in a list run by
// a pthread key's destructor, newest first. The main thread's do not run at
// exit then (a pthread key runs at thread exit only).
struct Entry {
  Dtor fn;
  void* obj;
  Entry* next;
};
pthread_key_t g_key;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

void RunEntries(void* head) {
  for (auto* e = static_cast<Entry*>(head); e != nullptr;) {
    Entry* next = e->next;
    e->fn(e->obj);
    free(e);
    e = next;
  }
}

void MakeKey() { pthread_key_create(&g_key, RunEntries); }

AtExitImpl FindImpl() {
  static AtExitImpl impl =
      reinterpret_cast<AtExitImpl>(gpuslice_old_dlsym(RTLD_DEFAULT, "__cxa_thread_atexit_impl"));
  return impl;
}

}  // namespace

__attribute__((visibility("hidden"))) int __wrap___cxa_thread_atexit_impl(Dtor fn, void* obj,
                                                                          void* dso) {
  if (AtExitImpl impl = FindImpl()) return impl(fn, obj, dso);
  pthread_once(&g_key_once, MakeKey);
  auto* e = static_cast<Entry*>(malloc(sizeof(Entry)));
  if (e == nullptr) return -1;
  *e = {fn, obj, static_cast<Entry*>(pthread_getspecific(g_key))};
  return pthread_setspecific(g_key, e);
}

}  // extern "C"
