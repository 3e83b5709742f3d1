#pragma once

// PTX for `sim_sleep_us(unsigned int us)`: a kernel that busy-waits on the
// GPU's global timer for `us` microseconds. On the simulated GPU the function
// name alone makes the launch take `us` of simulated GPU time; on a real GPU
// this PTX does the same for real. Demo workers and GPU checks use it so that
// one program measures the same thing on both.

namespace gpuslice::cli {

inline constexpr char kSleepKernelPtx[] = R"PTX(
.version 7.0
.target sm_52
.address_size 64

.visible .entry sim_sleep_us(.param .u32 sim_sleep_us_param_0)
{
  .reg .pred  %p<2>;
  .reg .b32   %r<2>;
  .reg .b64   %rd<6>;

  ld.param.u32     %r1, [sim_sleep_us_param_0];
  cvt.u64.u32      %rd1, %r1;
  mul.lo.s64       %rd2, %rd1, 1000;
  mov.u64          %rd3, %globaltimer;
$L_wait:
  mov.u64          %rd4, %globaltimer;
  sub.s64          %rd5, %rd4, %rd3;
  setp.lt.u64      %p1, %rd5, %rd2;
  @%p1 bra         $L_wait;
  ret;
}
)PTX";

}  // namespace gpuslice::cli
