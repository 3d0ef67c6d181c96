// Small progressive enhancements for every page. Pages work without it.
(function () {
  "use strict";
  var toggle = document.querySelector(".nav-toggle");
  var nav = document.getElementById("main-nav");
  if (toggle && nav) {
    toggle.addEventListener("click", function () {
      var open = toggle.getAttribute("aria-expanded") === "true";
      toggle.setAttribute("aria-expanded", String(!open));
      nav.classList.toggle("open", !open);
    });
  }
  document.querySelectorAll(".copy-field").forEach(function (input) {
    input.addEventListener("focus", function () { input.select(); });
  });
})();
