// LEAP CPU runtime shim: everything is in leap_cuda_cpu.h (force-included).
#pragma once
