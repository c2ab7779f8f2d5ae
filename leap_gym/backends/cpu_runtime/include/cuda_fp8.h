#pragma once
#error "LEAP_UNSUPPORTED: <cuda_fp8.h> is not available on the CPU runtime"
