"""The serving gate: what a host must serve before it joins the fleet."""
