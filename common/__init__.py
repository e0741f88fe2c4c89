"""The lowest layer: what every part of Odradek shares (the clock, durable file replacement, the command
lines' error). It imports nothing of the project, and every other package may import it
(docs/ARCHITECTURE.md, "Import direction")."""
