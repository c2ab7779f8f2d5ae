#pragma once
#error "LEAP_UNSUPPORTED: <cuda_pipeline.h> is not available on the CPU runtime"
