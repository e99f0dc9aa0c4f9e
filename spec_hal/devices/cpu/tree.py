"""CPU providers of family C (tree build / verify / accept): none; the portable references serve.

Measured at bs = 256 on 2 cores against a per-request Python loop: build_tree_kernel_efficient
runs 80-160x faster (its [bs, D, D] comparisons vectorise well); verify_tree_greedy runs 20-25x
faster than a loop indexing tensors and 5-17x faster than a loop over Python lists (already
converted). What is left is torch's per-op overhead of the W-1 walk steps (~100 small ops), which
only a compiled per-request loop would remove; no such provider is registered yet.
"""
