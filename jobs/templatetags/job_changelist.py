"""``{% job_result_list cl %}``: Django's ``result_list`` with the rows from ``page_rows``."""

from django import template
from django.contrib.admin.templatetags.admin_list import ResultList, result_headers, result_list

from jobs.changelist import page_rows

register = template.Library()


@register.inclusion_tag("admin/change_list_results.html")
def job_result_list(cl):
    """Render the results table: Django's headers, the rows rendered once per page."""
    rows = page_rows(cl)
    if rows is None:
        return result_list(cl)
    headers = list(result_headers(cl))
    return {
        "cl": cl,
        "result_hidden_fields": [],  # only an editable list has hidden fields
        "result_headers": headers,
        "num_sorted_fields": sum(1 for h in headers if h["sortable"] and h["sorted"]),
        "results": [ResultList(None, [row]) for row in rows],
    }
