// The countdowns of the approvals: the server writes the time left when
// it draws the page; this keeps it true while the page stays open. The
// page works without it.
(function () {
  "use strict";
  function span(s) {
    if (s >= 3600) { return Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m"; }
    if (s >= 60) { return Math.floor(s / 60) + "m " + (s % 60) + "s"; }
    return s + "s";
  }
  function tick() {
    var els = document.querySelectorAll("[data-expires]");
    for (var i = 0; i < els.length; i++) {
      var left = Math.floor((Date.parse(els[i].getAttribute("data-expires")) - Date.now()) / 1000);
      els[i].textContent = left > 0 ? span(left) + " left" : "expired";
      els[i].classList.toggle("expired", left <= 0);
      els[i].classList.toggle("soon", left > 0 && left < 300);
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    tick();
    window.setInterval(tick, 1000);
  });
})();
