//! Recursive inotify watches of directories inside the workspace.
