"""Live collection: collectors that follow their sources and write evidence as it happens.

Each collector is a small adapter whose client is passed in. They hand batches to one `Writer`
that owns the index, so a batch's records and the checkpoint that says they were read are
committed together: a collector killed at any moment resumes from its last committed
checkpoint, and whatever it reads twice is dropped by the evidence ids.
"""
