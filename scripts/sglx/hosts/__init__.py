"""`sglx hosts check`: the testinfra host checks (tests/host) over an Ansible inventory."""
