"""The admin plane's services: keys, teams, routes and the people who sign in to the console,
with their rules. The admin API and the console call them; the request path never does (it
reads what they write through the store's snapshot)."""
