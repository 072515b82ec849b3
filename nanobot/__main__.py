from nanobot.cli.app import run

run()
