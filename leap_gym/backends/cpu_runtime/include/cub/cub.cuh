#pragma once
#error "LEAP_UNSUPPORTED: <cub/cub.cuh> is not available on the CPU runtime"
