'use strict';
// The jobs and deployments lists need the page's width to show every column on a 1440 px
// screen, so each starts with the navigation sidebar closed unless the operator has chosen
// otherwise.
// This runs while the page is parsed, before Django's deferred nav_sidebar.js reads the
// choice; the default is lent for this page only and taken back once the page is set up,
// so other pages keep Django's default. A click on the toggle is stored as Django stores it.
{
    const key = 'django.admin.navSidebarIsOpen';
    if (localStorage.getItem(key) === null) {
        localStorage.setItem(key, 'false');
        document.addEventListener('DOMContentLoaded', function() {
            if (localStorage.getItem(key) === 'false') {
                localStorage.removeItem(key);
            }
        });
    }
}
