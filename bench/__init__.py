"""`make bench`: the seed method vs `sparsecopy copy --method allocated` on dirty loop disks."""
