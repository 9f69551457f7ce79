"""Writing an archive: LOs in OID order packed into frames, frames encoded on a thread
of their own into volumes or one stream, the index and manifest last."""
