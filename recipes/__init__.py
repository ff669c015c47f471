"""nsightlab's built-in recipes, one folder each (metadata.json + recipe.py).

Installed as the package ``nsightlab._recipes`` so they ship with nsightlab; recipe modules
are loaded from their folders by ``nsightlab.recipe_runner``, not imported from here.
"""
