"""One sglx platform class per family; what they do comes from the baked arch profile."""
