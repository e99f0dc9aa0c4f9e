"""CPU providers of family D (draft sampling): none, by design.

Every op of the family is a few whole-tensor torch calls over the vocabulary (softmax, the
exponential race, argmax, top-k, gathers): the portable reference already runs them as ATen's
vectorised, multi-threaded CPU kernels, and a hand-written loop would not beat them. The one loop
(the topk = 1 verify walk) runs over the D tree nodes, not the batch, with O(bs) work per step next
to the O(bs*D*V) argmax. So the CPU binds the portable reference (the descriptor's default intent).
"""
