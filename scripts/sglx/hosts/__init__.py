"""`sglx hosts check`: the testinfra host checks (hostchecks) over an Ansible inventory."""
