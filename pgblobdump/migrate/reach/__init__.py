"""Who may read a migrated column's bytes: the roles and grants (``access``) and the views
and SECURITY DEFINER routines that reach it (``paths``)."""
