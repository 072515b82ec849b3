"""The one owner of "may this happen?": what is protected and what each action needs."""
