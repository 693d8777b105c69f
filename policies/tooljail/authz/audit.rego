# Audit log masking.
#
# Names of tool input fields whose values the audit log must not record in clear (file
# contents and edit texts can hold secrets and are large). The daemon replaces the value of
# every field with one of these names, at any depth of the tool input, before logging it.
package tooljail.authz

# METADATA
# title: Masked input fields
# description: Field names of input.input whose values the audit log masks, at any depth.
# entrypoint: true
mask contains field if some field in masked_fields

# Write's content, Edit's texts, and MultiEdit's edits (which hold old_string and new_string).
masked_fields := {"content", "old_string", "new_string", "edits"}
