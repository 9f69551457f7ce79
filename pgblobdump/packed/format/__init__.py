"""The archive's bytes: what each struct, constant, frame, index record and manifest
field means, encoded and decoded, checked before anything is trusted. Imports nothing
of the other rooms of packed/."""
