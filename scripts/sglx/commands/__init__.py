"""The `sglx` command groups: one module per group (`sglx bundle ...` is commands/bundle.py),
each with its parser (`register`) and the handlers that turn parsed arguments into a call of
the group's package and a Result. sglx.cli composes them; nothing below imports them."""
