"""CPU providers of family E (simulated acceptance): none, by design.

``generate_simulated_accept_index`` writes O(bs * (S+1)) entries with a handful of torch calls and
``sample_simulated_acc_len`` is a host function: nothing here is worth a CPU-specific provider, so
the CPU binds the portable reference (the descriptor's default intent).
"""
