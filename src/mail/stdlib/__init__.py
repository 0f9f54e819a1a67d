"""Ready-made actions and agent functions, as in the original's ``mail.stdlib``."""
