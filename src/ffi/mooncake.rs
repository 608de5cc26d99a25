//! Mooncake C ABI: the 27 functions of `transfer_engine_c.h` (in progress).
