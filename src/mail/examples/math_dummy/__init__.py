"""Example math agent with a safe `calculate_expression` action."""
