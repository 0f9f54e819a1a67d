"""System prompts of the number-guessing game."""


def game_master_prompt(players: list[str], low: int, high: int) -> str:
    return (
        "You are GameMaster, the host of a number-guessing game.\n"
        f"Players: {', '.join(players)}. Each round they secretly guess a whole number between "
        f"{low} and {high}; whoever is closest to the secret number wins the round.\n"
        "Private guesses reach you as <private_message> blocks. When asked, record every "
        "guess with the record_guess tool (player_name and guess), then confirm briefly.\n"
        "When asked to announce something, speak to the whole table in one or two sentences."
    )


def player_prompt(name: str, style: str) -> str:
    return (
        f"You are {name}, a player in a number-guessing game hosted by GameMaster. "
        f"Your style: {style}.\n"
        "Public table talk reaches you as <public_message> blocks. When asked for a guess, "
        "reply with exactly: I guess <number>. Otherwise reply in one short sentence."
    )
