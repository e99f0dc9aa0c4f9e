"""CPU providers of this op family: placeholder until the family lands."""
