/* cuda_runtime.h of the CPU emulator (tests/kernels/emu): see ct_cuda_emu.h. */
#include "ct_cuda_emu.h"
