// The executables' part of glibc_compat.cc: the C start-up code's
// __libc_start_main (2.34 on a new glibc). Apart because only executables
// have start-up code.

#include "shim/glibc/glibc_compat.h"

extern "C" {

using MainFn = int (*)(int, char**, char**);
using InitFn = void (*)(int, char**, char**);
using FiniFn = void (*)();

int gpuslice_old_libc_start_main(MainFn, int, char**, InitFn, FiniFn, FiniFn, void*);
GPUSLICE_OLD(gpuslice_old_libc_start_main, __libc_start_main, GPUSLICE_GLIBC_BASE);

// The executable's constructors, delimited by the linker.
extern InitFn __init_array_start[] __attribute__((visibility("hidden")));
extern InitFn __init_array_end[] __attribute__((visibility("hidden")));

namespace {

void RunConstructors(int argc, char** argv, char** envp) {
  for (InitFn* f = __init_array_start; f != __init_array_end; ++f) (*f)(argc, argv, envp);
}

}  // namespace

// Start-up code from glibc >= 2.34 passes no init: the new
// __libc_start_main runs the executable's constructors itself, an old one
// runs only what `init` runs (the old start-up code passed
// __libc_csu_init). Passing RunConstructors does it once on both: a new
// glibc then takes the program for a legacy one and calls it instead of its
// own. fini stays null: ld.so runs the executable's destructors on both
// (the old __libc_csu_fini of a dynamic program did nothing).
__attribute__((visibility("hidden"))) int __wrap___libc_start_main(MainFn main, int argc,
                                                                   char** argv, InitFn init,
                                                                   FiniFn fini, FiniFn rtld_fini,
                                                                   void* stack_end) {
  if (init == nullptr) init = RunConstructors;
  return gpuslice_old_libc_start_main(main, argc, argv, init, fini, rtld_fini, stack_end);
}

}  // extern "C"
