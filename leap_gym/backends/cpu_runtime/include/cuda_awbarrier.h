#pragma once
#error "LEAP_UNSUPPORTED: <cuda_awbarrier.h> is not available on the CPU runtime"
