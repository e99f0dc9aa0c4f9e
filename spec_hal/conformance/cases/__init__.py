"""Case generators per op family (see spec_hal.conformance.case)."""
