"""The course's JupyterLab settings: `make lab` starts `jupyter lab --config=.jupyter/jupyter_lab_config.py`,
and so does the browser test (tests/ui). They ship with the course, so a student's own ~/.jupyter is untouched.

- Serve the repository's root, so the file browser shows lessons/, exercises/, solutions/, assignments/,
  results/ and docs/, and the lessons' relative links (../docs/reference.md) resolve; open lesson 00 first.
- Reach for no network on start: no news feed (and no pop-up asking about it), no update check, no
  extension manager querying PyPI. The front-end half of this is lab-settings/overrides.json.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent  # traitlets runs this file with __file__ set

c = get_config()  # noqa: F821 (provided by traitlets when it loads a config file)
c.ServerApp.root_dir = str(HERE.parent)
c.LabApp.default_url = "/lab/tree/lessons/00_welcome.ipynb"
c.LabApp.app_settings_dir = str(HERE / "lab-settings")  # overrides.json: the course's default settings
c.LabApp.news_url = None  # no Atom feed fetched, and the front end does not ask about news
c.LabApp.check_for_updates_class = "jupyterlab.handlers.announcements.NeverCheckForUpdate"
c.LabApp.extension_manager = "readonly"  # the extension manager does not search PyPI
