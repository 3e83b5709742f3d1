// Interposing dlsym and dlvsym, the route by which runtimes (libcudart,
// PyTorch, JAX) reach the driver: dlopen("libcuda.so.1") and then dlsym on
// that handle, which searches libcuda itself and would bypass our exported
// symbols. For a hooked name whose answer is the real driver's function we
// return our wrapper instead.
//
// dlsym(RTLD_NEXT, ...) must keep its meaning: "the next object after the
// CALLER". glibc finds the caller from the return address, so a C++ wrapper
// calling the real dlsym would make every RTLD_NEXT lookup relative to this
// library (and an interposer of, say, malloc would get itself back). The
// exported entry points are therefore tiny assembly trampolines: for
// RTLD_NEXT they jump (not call) to the real function, which then sees the
// original return address; everything else goes to the C++ code below.

#include <dlfcn.h>

#include <atomic>

#include "shim/driver.h"
#include "shim/hooks.h"
#include "shim/shim_state.h"

extern "C" {
__attribute__((visibility("hidden"))) void* gpuslice_dlsym_impl(void* handle, const char* name);
__attribute__((visibility("hidden"))) void* gpuslice_dlvsym_impl(void* handle, const char* name,
                                                                 const char* version);
}

#if defined(__x86_64__)
__asm__(R"(
    .text
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
    cmpq $-1, %rdi
    jne gpuslice_dlsym_impl
    movq gpuslice_real_dlsym(%rip), %rax
    testq %rax, %rax
    je 1f
    jmp *%rax
1:  pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call gpuslice_resolve_real_dlsym
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    je 2f
    jmp *%rax
2:  ret
    .cfi_endproc
    .size dlsym, .-dlsym

    .globl dlvsym
    .type dlvsym, @function
    .p2align 4
dlvsym:
    .cfi_startproc
    cmpq $-1, %rdi
    jne gpuslice_dlvsym_impl
    movq gpuslice_real_dlvsym(%rip), %rax
    testq %rax, %rax
    je 1f
    jmp *%rax
1:  pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    pushq %rdx
    .cfi_adjust_cfa_offset 8
    call gpuslice_resolve_real_dlvsym
    popq %rdx
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    je 2f
    jmp *%rax
2:  ret
    .cfi_endproc
    .size dlvsym, .-dlvsym
)");
#elif defined(__aarch64__)
__asm__(R"(
    .text
    .globl dlsym
    .type dlsym, %function
    .p2align 4
dlsym:
    cmn x0, #1
    b.eq 0f
    b gpuslice_dlsym_impl
0:  adrp x16, gpuslice_real_dlsym
    ldr x16, [x16, :lo12:gpuslice_real_dlsym]
    cbz x16, 1f
    br x16
1:  stp x29, x30, [sp, #-32]!
    stp x0, x1, [sp, #16]
    bl gpuslice_resolve_real_dlsym
    mov x16, x0
    ldp x0, x1, [sp, #16]
    ldp x29, x30, [sp], #32
    cbz x16, 2f
    br x16
2:  mov x0, #0
    ret
    .size dlsym, .-dlsym

    .globl dlvsym
    .type dlvsym, %function
    .p2align 4
dlvsym:
    cmn x0, #1
    b.eq 0f
    b gpuslice_dlvsym_impl
0:  adrp x16, gpuslice_real_dlvsym
    ldr x16, [x16, :lo12:gpuslice_real_dlvsym]
    cbz x16, 1f
    br x16
1:  stp x29, x30, [sp, #-48]!
    stp x0, x1, [sp, #16]
    str x2, [sp, #32]
    bl gpuslice_resolve_real_dlvsym
    mov x16, x0
    ldp x0, x1, [sp, #16]
    ldr x2, [sp, #32]
    ldp x29, x30, [sp], #48
    cbz x16, 2f
    br x16
2:  mov x0, #0
    ret
    .size dlvsym, .-dlvsym
)");
#else
#error "dlsym trampolines exist for x86-64 and aarch64 only"
#endif

namespace gpuslice::shim {
namespace {

// Our wrapper when `found` is the real function of a hooked `name`.
void* Redirect(const char* name, void* found) {
  if (found == nullptr || Disabled()) return found;
  HookId id = FindHookBySymbol(name);
  if (id == kHookCount) return found;
  if (found == kWrappers[id]) return found;
  bool loaded = kHooks[id].library == HookLibrary::kCuda ? LoadCuda() : LoadNvml();
  // Not loaded: either there is no such library (then `found` did not come
  // from it) or we are inside its loading (its constructor looking itself
  // up); both mean "not ours to redirect".
  if (!loaded) return found;
  return g_real[id] == found ? kWrappers[id] : found;
}

}  // namespace
}  // namespace gpuslice::shim

extern "C" {

void* gpuslice_dlsym_impl(void* handle, const char* name) {
  auto real = reinterpret_cast<void* (*)(void*, const char*)>(gpuslice_resolve_real_dlsym());
  if (real == nullptr) return nullptr;
  return gpuslice::shim::Redirect(name, real(handle, name));
}

void* gpuslice_dlvsym_impl(void* handle, const char* name, const char* version) {
  auto real = reinterpret_cast<void* (*)(void*, const char*, const char*)>(
      gpuslice_resolve_real_dlvsym());
  if (real == nullptr) return nullptr;
  return gpuslice::shim::Redirect(name, real(handle, name, version));
}
}
