"""The commands that move LOs out to files and objects and back: export, import."""
