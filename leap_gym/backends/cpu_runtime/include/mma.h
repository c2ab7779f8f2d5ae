// LEAP CPU runtime: tensor-core WMMA cannot be emulated here.
#pragma once
#error "LEAP_UNSUPPORTED: tensor-core WMMA (mma.h, nvcuda::wmma) cannot run on the CPU runtime"
