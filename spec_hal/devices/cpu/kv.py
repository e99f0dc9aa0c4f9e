"""CPU providers of family B (KV movement): none, on purpose.

The portable references already are the CPU implementation: ``move_kv_cache`` is one
``index_select`` and one ``index_copy_`` per buffer (ATen's parallel row copies), and the slot lists
of ``move_accept_tokens_to_target_kvcache`` are a handful of vectorised ops over ``bs * W`` lanes.
Measured at bs = 256 (W = 4, 2 cores), the public op with the portable reference runs 26x (8
buffers) to 51x (64 buffers) faster than a per-request Python loop; a CPU-specific provider would
only save the masking of -1 lanes, which costs a few small ops per call.
"""
