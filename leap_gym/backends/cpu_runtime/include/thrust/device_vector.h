#pragma once
#error "LEAP_UNSUPPORTED: <thrust/device_vector.h> is not available on the CPU runtime"
